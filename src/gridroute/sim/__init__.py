"""gridroute.sim"""
