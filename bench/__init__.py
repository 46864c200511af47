"""Scale benchmark of the program under the mock engine (issue 8): `python -m bench` / `make bench`."""
