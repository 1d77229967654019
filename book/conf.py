# Sphinx configuration of the course site built by `make book` / `dpviz book` (copied into the
# build's source folder beside the executed notebooks; see dpviz/app/book.py).
project = "dpviz: data-parallel training, live"
author = "dpviz contributors"
extensions = ["myst_nb"]
nb_execution_mode = "off"            # `dpviz book` has just executed every notebook on live ranks
nb_execution_raise_on_error = True
myst_enable_extensions = ["dollarmath"]
html_theme = "alabaster"
html_static_path = ["_static"]
html_title = project
# Widgets render from the state saved with each notebook, with JavaScript served by the site
# itself (vendored from npm at build time), so the site works with no network.
nb_ipywidgets_js = {"require.js": {}, "embed-amd.js": {}}   # paths inside _static/
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
# No copy of each notebook under _sources/: with every widget position recorded in its saved
# state, the copy would double the site's size for a link no reader of the site needs.
html_copy_source = False
html_show_sourcelink = False
