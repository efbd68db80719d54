"""What a request must pass before the engine sees it, in plain terms (no mitmproxy here):
the limits on a request's head and body and the rules HTTP sets for it (limits.py), the
destinations a proxy may reach (destinations.py), the hold on wrong proxy passwords
(auth_throttle.py), and the guard that applies them all in order (guard.py).

The package sits at the engine's layer (4): guard reads the settings; limits,
auth_throttle and destinations need only jsonsafe and keys. The mitmproxy front end (mitm/)
turns their refusals into answers.
"""
