"""What pgrad keeps on disk and how it reads it back: atomic, verified checkpoints, files
written aside and swapped in, a directory's writer lock, and the rule for code a directory
names (it is data: nothing in it runs).
"""
