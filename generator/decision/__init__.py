"""The decision: the report per configuration, its text, qualification sheets and rentals."""
