"""gridroute.demo"""
