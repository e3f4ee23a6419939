"""gridroute.grid"""
