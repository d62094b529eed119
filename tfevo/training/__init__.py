"""tfevo.training"""
