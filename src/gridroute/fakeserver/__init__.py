"""gridroute.fakeserver"""
