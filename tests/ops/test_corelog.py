"""ops.corelog: the core's log lines reach `logging` in the plugin, and nowhere while the
OCI hook has them silenced (its stderr is runc's one line)."""

import logging

from nri_plugin.ops.corelog import CoreLogger, silenced

LOG = CoreLogger("nri_sla.test.corelog")


def log_a_failure() -> None:
    try:
        raise KeyError("gpu-0")
    except KeyError:
        LOG.error("deciding %s failed", "ctr-1", exc_info=True)


def test_a_line_goes_to_the_named_logger_as_the_callers(caplog, monkeypatch):
    # ops.logsetup turns logging's caller lookup off for the plugin (an earlier test in this
    # process may have run it); this test checks the caller a record names, so it is on.
    monkeypatch.setattr(logging, "_srcfile", logging.addLevelName.__code__.co_filename)
    with caplog.at_level(logging.DEBUG, logger="nri_sla"):
        log_a_failure()
        LOG.warning("fallback to %s", "sysfs")
        LOG.info("room %d", 3)
        LOG.debug("scan")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("nri_sla.test.corelog", logging.ERROR, "deciding ctr-1 failed"),
        ("nri_sla.test.corelog", logging.WARNING, "fallback to sysfs"),
        ("nri_sla.test.corelog", logging.INFO, "room 3"),
        ("nri_sla.test.corelog", logging.DEBUG, "scan"),
    ]
    failure = caplog.records[0]
    assert failure.exc_info is not None and failure.exc_info[0] is KeyError
    # the record names the code that logged, not corelog's forwarding
    assert (failure.funcName, failure.pathname) == ("log_a_failure", __file__)


def test_silenced_drops_lines_until_it_ends_also_nested(caplog):
    with caplog.at_level(logging.DEBUG, logger="nri_sla"):
        with silenced():
            log_a_failure()
            with silenced():
                LOG.warning("inner")
            LOG.warning("after the inner block: still silenced")
        LOG.warning("heard")
    assert [r.getMessage() for r in caplog.records] == ["heard"]
