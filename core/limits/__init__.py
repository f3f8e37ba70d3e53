"""The ground floor's resource limits: the memory budget (`budget`) and the deadline
(`deadline`); `heap` keeps big freed arrays from staying in the process. They import only the
root vocabulary (errors, settings), so `files/`, `load/`, `results.py` and every floor above
draw on the same two objects."""
