"""Whether answers were acceptable: the labels the router's quality model learns from.

feedback.py   the answers kept for labels: POST /v1/feedback, re-asks, what the ending sees
packed.py     a request's quality features in one bytes (~150 bytes), as an answer waits for its label
settings.py   ``[feedback]``: how many answers and sessions wait for labels
labels.py     each label written beside the answer's ledger row (the ``answer_labels`` table)
shadow.py     shadow comparisons: a sample of answers asked again of a reference tier
"""
