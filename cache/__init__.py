"""Result and media caches (diskcache embedded, Redis shared). Not wired in yet: see the cache issue."""
