"""The static site: build, pages, charts, notes and evidence bundles."""
