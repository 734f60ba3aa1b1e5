"""What the router learns, apart from how it decides: the :class:`~router.Learner` and the models it
owns (latency predictors, output share, prompt-token calibration, the work book, difficulty)."""
