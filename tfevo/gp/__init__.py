"""tfevo.gp"""
