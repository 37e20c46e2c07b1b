"""The protocol layer: the committer template (:mod:`.committer`), the job journal and
task attempts. Each committer fills the template's hooks; the stages, their order, their
errors and the abort on failure are written once here."""
