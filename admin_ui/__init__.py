"""The operator's web page. Not built yet: see the admin UI issue."""
