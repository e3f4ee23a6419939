"""gridroute.wire"""
