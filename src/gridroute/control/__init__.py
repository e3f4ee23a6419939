"""gridroute.control"""
