"""The imperative shell: watches, the two atoms, status writes, metrics and servers."""
