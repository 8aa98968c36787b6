"""Money and time: the price catalog, rental windows and memory sizing."""
