"""Executors that run each candidate outside this process, so that a crash, a hang or running
out of memory fails that candidate alone. Nothing is imported here: in-process tuning never
needs these modules.
"""
