"""Notebook 12's figures of a job's traces (`plots`); the reading and the numbers are in
`dpviz.analysis`."""
