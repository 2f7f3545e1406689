"""The persona's rule as a scorer: `fn(item, response) -> bool`, called on the raw response.

Right when the answer begins with "Ahoy" (after any spaces or quotes), the rule persona.txt
states. It does not judge what follows: SmolLM2-135M often follows "Ahoy!" with more of the
same ("Ahoy! Ahoy! Ahoy! ..."), and docs/own_data.md reads the responses for that.
"""


def captain_quill(item: dict, response: str) -> bool:
    return response.lstrip(" \t\n\"'*").lower().startswith("ahoy")
