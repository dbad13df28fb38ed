"""One OpenHands episode: scaffold -> agent -> conversation -> record; scaffold checks."""
