"""The protocol layer: :class:`~.committer.OutputCommitter`, written once for every
committer. Its parts: configuration (:mod:`.options`), what the destination shows
(:mod:`.destination`), the hooks each committer fills in (:mod:`.hooks`), task attempts
(:mod:`.tasks`, :mod:`.attempts`), job commit as named stages (:mod:`.job_commit`) and
the journal's recovery rules (:mod:`.recovery`, :mod:`.journal`), and the jobs this
process set up and has not ended (:mod:`.active_jobs`)."""
