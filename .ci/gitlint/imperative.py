"""The commit subject says what the commit does, as a command: "Add ...", not "Added ..." or "Adds ..."."""

from __future__ import annotations

import re

from gitlint.rules import CommitMessageTitle, LineRule, RuleViolation

# Imperative verbs whose spelling ends like a past tense, a gerund or a third person.
_IMPERATIVE_LOOKALIKES = {"embed", "shed", "bring", "ping", "string"}
_NOT_IMPERATIVE = re.compile(r"(?:[^e]ed|ing|[^suia]s)$")  # "added", "adding", "adds"; not "feed", "pass", "focus"


class ImperativeSubject(LineRule):
    """The subject starts with a capitalised verb in the imperative."""

    name = "title-imperative"
    id = "UT1"
    target = CommitMessageTitle

    def validate(self, line, _commit):
        first = line.split(maxsplit=1)[0] if line.strip() else ""
        word = re.sub(r"[^A-Za-z]", "", first)
        if not first[:1].isupper():
            return [RuleViolation(self.id, 'Subject does not start with a capital letter ("Add ...")', line)]
        if word.lower() not in _IMPERATIVE_LOOKALIKES and _NOT_IMPERATIVE.search(word.lower()):
            message = f'Subject does not start with a verb in the imperative ("Add", not "Added" or "Adds"): {first}'
            return [RuleViolation(self.id, message, line)]
        return []
