"""gridroute.operator"""
