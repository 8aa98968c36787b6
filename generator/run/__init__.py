"""The protocol runner: the campaign file, the dry run and stages, rotated trials, resume, per-card sets, doctor."""
