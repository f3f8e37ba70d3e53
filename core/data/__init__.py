"""Answers on the user's data (`--data PATH`): a data set read in batches, torch and every
candidate run on each batch by the one loop (parity.sources.data), and per output what
changes for the people who use the model: classes, neighbours, errors relative to the
output's spread, accuracy with labels (parity.analyses.answers). Memory of a batch, never of
the data set: per sample a few numbers are kept, and the arrays of the worst few samples.
"""
