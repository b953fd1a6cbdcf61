"""A fault campaign over the whole live path (``fraudlake chaos``): faults, SQL edits, bad input, then the checks."""
