"""The chaos run: sidecars, subscribers and a broker under a seeded fault schedule.

``python -m tests.chaos --seed N --faults 200 --minutes M`` runs a soak; the test
suite runs a short seed (``test_chaos.py``). See docs/reliability.md.
"""
