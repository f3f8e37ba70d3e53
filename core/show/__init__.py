"""Showing: rows, sentences, terminal tables, numpy views and plotly figures of a run."""
