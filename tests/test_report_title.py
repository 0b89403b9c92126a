"""A long report's title line is searched on its own as one more ranked signal (hybrid.summary_line)."""
from repoctx.retrieve.hybrid import SearchOptions, search
from repoctx.retrieve.query import summary_line
from tests.conftest import open_index

FILES = {
    "app/logs.py": "def rotate_log_files(handler):\n    \"\"\"Rotate the log files once they grow past the size limit.\"\"\"\n"
                   "    return handler.rollover()\n",
    "app/config.py": "def parse_config_value(raw):\n    \"\"\"Parse one config value from the settings file; a bad value raises "
                     "ConfigError.\"\"\"\n    return raw.strip()\n\n\ndef load_settings_file(path):\n"
                     "    \"\"\"Read the settings file and parse every config value.\"\"\"\n"
                     "    return [parse_config_value(x) for x in open(path)]\n",
    "app/server.py": "def start_server(settings):\n    \"\"\"Start the server with the parsed settings.\"\"\"\n    return settings\n",
}
# the title names the problem; the body's many words are about everything around it
REPORT = ("Log rotation never happens\n\nI start the server with a settings file. The settings file has a config value "
          "per line, every config value is parsed when the settings file is read, and the parsed settings start the "
          "server. After a week the settings file, the config value parsing and the server all work, but the disk is full.")


def test_summary_line():
    assert summary_line("get_backend() clears figures if created under rc_context\n\nbody") == \
        "get_backend() clears figures if created under rc_context"
    assert summary_line("## Bug: the **thing** breaks\nsteps") == "Bug: the thing breaks"
    assert summary_line("ExpressionWrapper for ~Q(pk__in=[]) crashes.\nbody") == "ExpressionWrapper for ~Q(pk__in=[]) crashes."
    assert summary_line("Fix duplicated *args and **kwargs\nbody") == "Fix duplicated *args and **kwargs"
    assert summary_line("How is the CSRF token verified?") is None  # one line: the whole text is its summary
    assert summary_line("import os\nos.getcwd()") is None  # code sums nothing up
    assert summary_line("Broken\nit fails") is None  # too short to search on its own
    assert summary_line("How do I fix this?\n    x = compute(1)") is None  # one content word: nothing to search


def test_a_reports_title_is_one_more_signal(make_repo, tmp_path):
    ix = open_index(make_repo(FILES), tmp_path / "idx")
    ix.update()

    def first(query, weight=None):
        weights = {"lexical": 1.0, "dense": 1.0} | ({} if weight is None else {"summary": weight})
        return search(ix.store, query, SearchOptions(k=4, weights=weights), None)

    without = first(REPORT, weight=0.0)
    assert without[0].capsule.name != "rotate_log_files" and all("summary_lexical" not in h.why for h in without)
    hits = first(REPORT)
    assert hits[0].capsule.name == "rotate_log_files" and hits[0].why["summary_lexical"]["rank"] == 1
    # a one-line question is searched once, as before
    assert all("summary_lexical" not in h.why for h in first("why does log rotation never happen"))
