"""The learning benchmark: runs planned, launched one process each, reported in tables and curves
with statistics over seeds; and the learning targets (env steps to a solve criterion)."""
