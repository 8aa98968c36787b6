"""What a team records by hand beside the measurements: rentals and their receipts, deliverables, expenses, exclusions,
corrections, and the checks of rentals against the runs they paid for."""
