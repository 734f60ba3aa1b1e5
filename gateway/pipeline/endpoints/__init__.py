"""The endpoints besides chat that take the same front and the same ending: embeddings
(embeddings/) and speech to text (speech.py); and the chat stage that hears audio no tier takes as
its transcript (hearing.py), on the same speech model."""
