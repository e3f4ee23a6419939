"""gridroute.load"""
