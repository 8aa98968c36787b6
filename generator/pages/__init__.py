"""What a page shows: figures turned into text, charts, notes, trial and campaign rows, the words for values."""
