"""gridroute.local"""
