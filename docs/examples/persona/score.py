"""The persona's rule as a scorer: `fn(item, response) -> bool`, called on the raw response.

Right when the answer begins with "Ahoy" and then says something: at least three words that
are not another "ahoy" (a response of "Ahoy! Ahoy! Ahoy! ..." follows the letter of the rule but
answers nothing).
"""

import re


def captain_quill(item: dict, response: str) -> bool:
    text = response.strip()
    if not text.lower().startswith("ahoy"):
        return False
    words = [w for w in re.findall(r"[a-z']+", text.lower()) if w != "ahoy"]
    return len(words) >= 3
