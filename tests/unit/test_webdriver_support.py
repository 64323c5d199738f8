"""The browser tests' WebDriver helper: a command on an element named by a
CSS selector survives the page replacing that element (the dashboard redraws
its tables on every refresh), and an element held by reference does not."""

import pytest

from tests.support.webdriver import ELEMENT, STALE_RETRIES, Element, Session, WebDriverError


class ScriptedSession(Session):
    """A session whose driver answers from a script: finds return fresh
    element IDs, and the first ``stale`` element commands fail as stale."""

    def __init__(self, stale):
        self.stale = stale
        self.calls = []
        self.found = 0

    def call(self, method, path, payload=None, timeout=60.0):
        self.calls.append((method, path))
        if path == "/element":
            self.found += 1
            return {ELEMENT: "e%d" % self.found}
        if self.stale:
            self.stale -= 1
            raise WebDriverError(404, "stale element reference", "stale element not found")
        return "text of %s" % path.split("/")[2]


def test_a_selector_is_found_again_when_its_element_went_stale():
    session = ScriptedSession(stale=2)
    assert session.text("td.total") == "text of e3"
    assert [p for _, p in session.calls] == ["/element", "/element/e1/text", "/element", "/element/e2/text",
                                              "/element", "/element/e3/text"]


def test_a_selector_that_stays_stale_fails_after_the_bounded_retries():
    session = ScriptedSession(stale=STALE_RETRIES)
    with pytest.raises(WebDriverError, match="stale"):
        session.attribute("a", "href")
    assert session.found == STALE_RETRIES


def test_an_element_by_reference_is_not_looked_up_again():
    session = ScriptedSession(stale=1)
    with pytest.raises(WebDriverError, match="stale"):
        session.text(Element("e7"))
    assert session.calls == [("GET", "/element/e7/text")]


def test_other_errors_are_not_retried():
    class Broken(ScriptedSession):
        def call(self, method, path, payload=None, timeout=60.0):
            if path != "/element":
                self.calls.append((method, path))
                raise WebDriverError(400, "invalid argument", "no")
            return super().call(method, path, payload, timeout)

    session = Broken(stale=0)
    with pytest.raises(WebDriverError, match="invalid argument"):
        session.click("button")
    assert session.calls == [("POST", "/element"), ("POST", "/element/e1/click")]
