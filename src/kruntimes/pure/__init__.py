"""No I/O, no clock, no randomness: everything that decides a placement lives here."""
