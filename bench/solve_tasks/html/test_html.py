from lib import html


def test_escape_quotes():
    assert html.escape("it's \"x\"") == "it&#x27;s &quot;x&quot;"


def test_escape_without_quotes():
    assert html.escape("<a href='x'>&</a>", quote=False) == "&lt;a href='x'&gt;&amp;&lt;/a&gt;"


def test_unescape_reverses_escape():
    text = "<it's & \"ok\">"
    assert html.unescape(html.escape(text)) == text
