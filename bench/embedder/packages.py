"""The training corpus: PyPI wheels with good docstrings, pinned, and what is kept out of them.

None of the evaluation projects (SWE-bench Lite's repositories, and the projects of bench/data/train)
is here, and files of theirs vendored inside a wheel are dropped by path (``EXCLUDED_MODULES``).
Versions are the newest on PyPI when the list was made (late 2026); a wheel that no longer downloads
is skipped with a note, never replaced by another version.
"""
from __future__ import annotations

# name -> exact version. Wheels only (pip never builds or runs package code to download them).
PACKAGES: dict[str, str] = {
    # HTTP, async, networking
    "httpx": "0.28.1", "httpcore": "1.0.9", "h11": "0.16.0", "anyio": "4.16.0", "trio": "0.35.0",
    "aiohttp": "3.14.5", "tornado": "6.6.1", "twisted": "26.10.0", "urllib3": "2.8.0",
    "websockets": "17.4", "paramiko": "5.1.0", "dnspython": "2.9.2",
    # web frameworks and their parts
    "starlette": "1.10.0", "fastapi": "0.163.2", "falcon": "4.4.0", "bottle": "0.13.4",
    "pyramid": "2.1", "webob": "1.8.11", "mako": "1.4.3", "scrapy": "2.19.0", "parsel": "1.12.1",
    "w3lib": "2.5.0", "beautifulsoup4": "4.15.0", "html5lib": "1.1", "bleach": "6.4.0",
    "oauthlib": "4.0.1", "pyjwt": "2.15.1",
    # data, validation, serialisation
    "attrs": "26.1.0", "cattrs": "26.2.1", "pydantic": "2.14.3", "marshmallow": "4.4.0",
    "jsonschema": "4.26.0", "cerberus": "1.3.8", "voluptuous": "0.16.0", "pyyaml": "6.0.3",
    "tomlkit": "0.15.2", "openpyxl": "3.1.5", "xlsxwriter": "3.3.1", "pypdf": "7.1.0",
    "icalendar": "7.3.0", "feedparser": "6.0.14",
    # databases
    "sqlalchemy": "2.1.9", "alembic": "1.20.1", "peewee": "4.5.3", "sqlparse": "0.6.1",
    "redis": "8.1.0", "pymongo": "4.20.0",
    # task queues, scheduling, time
    "celery": "5.7.0", "kombu": "5.7.0", "apscheduler": "3.11.3",
    "tenacity": "9.2.1", "python-dateutil": "4.0.0", "arrow": "1.4.0", "pendulum": "3.3.0",
    # developer tools, parsing
    "black": "26.10.1", "isort": "9.0.2", "jedi": "0.20.1", "parso": "0.8.7", "libcst": "1.9.0",
    "pygments": "2.21.0", "docutils": "0.23", "markdown": "3.11.3", "mistune": "3.4.0",
    "pyparsing": "3.3.3", "lark": "1.3.1", "setuptools": "84.2.1", "packaging": "26.3",
    "hypothesis": "6.170.15", "dulwich": "1.2.21", "gitpython": "3.2.1", "mkdocs": "1.6.1",
    "nbformat": "5.11.1", "babel": "2.18.0",
    # command line, terminal
    "rich": "15.0.0", "typer": "0.29.1", "fire": "0.7.1", "invoke": "3.0.3",
    "fabric": "3.2.3", "prompt-toolkit": "3.0.53", "pexpect": "4.9.0", "tqdm": "4.70.1",
    "tabulate": "0.10.0", "ipython": "9.18.1", "traitlets": "5.16.1",
    # systems
    "psutil": "7.2.2", "watchdog": "7.1.0", "cachetools": "8.0.0", "wrapt": "2.5.2",
    "boltons": "26.2.0", "pydash": "8.1.0", "more-itertools": "11.2.1", "toolz": "1.2.0",
    "sortedcontainers": "2.4.0",
    # science (the .py files of binary wheels)
    "numpy": "2.5.5", "pandas": "3.1.1", "networkx": "3.7", "statsmodels": "0.15.0", "dask": "2026.8.0",
    "nltk": "3.10.4", "pillow": "13.0.0",
}

# Held out: their pairs are never trained on; the validation metric is measured on them. One web
# framework, one scientific library, one documentation tool (as the evaluation projects are).
VALIDATION: tuple[str, ...] = ("tornado", "networkx", "docutils")

# Evaluation projects (import names). A wheel's file or folder under one of these names is a vendored
# copy or an integration with it (celery/contrib/django, jedi/plugins/pytest.py) and is dropped, at the
# price of a few false alarms (starlette/requests.py).
EXCLUDED_MODULES = frozenset({
    "django", "sympy", "pytest", "_pytest", "sphinx", "matplotlib", "mpl_toolkits", "sklearn", "astropy",
    "requests", "pylint", "xarray", "seaborn", "flask", "click", "jinja2", "werkzeug",
})
EXCLUDED_PROJECTS = frozenset({
    "django", "sympy", "pytest", "sphinx", "matplotlib", "scikit-learn", "astropy", "requests", "pylint",
    "xarray", "seaborn", "flask", "click", "jinja2", "werkzeug",
})
# Folders of third-party code inside a wheel.
VENDOR_DIRS = frozenset({"_vendor", "vendor", "vendored", "_vendored", "extern", "_extern", "third_party",
                         "thirdparty", "externals", "_externals"})

assert not {n.lower() for n in PACKAGES} & EXCLUDED_PROJECTS
assert set(VALIDATION) <= set(PACKAGES)
