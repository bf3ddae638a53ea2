"""What the faithfulness audit runs on and what it checked: the documents of each kind in
tests/data, and the tally of audited jobs that the closing summary reports
(tests/core/test_audit.py, tests/core/test_audit_gemma.py, tests/core/conftest.py)."""

from __future__ import annotations

from typing import Any

CORPUS = {
    "english": "sample.docx",  # the opening of Moby-Dick
    "chinese": "chinese-gbk.txt",  # 道德经, 论语, Tang poems (GBK on disk)
    "code": "sample.py",  # CPython's bisect.py
    "mixed": "mixed.md",  # English, Chinese, German, Russian, emoji, code blocks, a table
    "web": "sample.html",
}
# for the closing summary (tests/core/conftest.py)
AUDITED: dict[str, Any] = {"jobs": 0, "calls": 0, "document_tokens": 0, "documents": set()}

