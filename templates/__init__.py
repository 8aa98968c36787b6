"""The Jinja2 templates of the site, shipped inside the package as iteralab.templates."""
