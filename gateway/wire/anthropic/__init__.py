"""Anthropic's Messages API beyond its shapes (gateway/wire/messages.py): the inventory of every field of
the ``anthropic`` SDK's request types (:mod:`.fields`), and faults in Anthropic's words (:mod:`.errors`)."""
