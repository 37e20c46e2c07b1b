"""The protocol layer: :class:`~.committer.OutputCommitter`, written once for every
committer. Its chain: configuration (:mod:`.options`), the hook interface each committer
fills in (:mod:`.hooks`), the job side (:mod:`.committer`). Its collaborators, each given
the committer as its hooks: what the destination shows (:mod:`.destination`), task
attempts (:mod:`.tasks`, :mod:`.attempts`), job commit as named stages
(:mod:`.job_commit`) and the journal's recovery rules (:mod:`.recovery`,
:mod:`.journal`); when a committed job's clean-up runs (:mod:`.cleanup`), and the jobs
this process set up and has not ended (:mod:`.active_jobs`)."""
