"""Hadoop's example documents (reference hadoop-committers.md §1), verbatim, for all tests."""

PENDING = (
    '{"version":2,"filename":null,"uri":"s3a://bkt/out/__magic_job-0d1f/job-0d1f/00/tasks/'
    'attempt_202410091320_0001_m_000000_0/__base/year=2024/part-0000.csv","uploadId":"VXBsb2FkSWQ",'
    '"bucket":"bkt","destinationKey":"out/year=2024/part-0000.csv","created":1728480000000,'
    '"saved":1728480000000,"date":"Wed Oct 09 13:20:00 UTC 2024","jobId":"","taskId":"","text":"",'
    '"etags":["\\"9b2cf535f27731c974343645a3985328\\""],"extraData":{},"iostatistics":{"counters":{},'
    '"gauges":{},"minimums":{},"maximums":{},"meanstatistics":{}},"length":5,"partCount":1}'
)
SUCCESS = (
    '{"name":"org.apache.hadoop.fs.s3a.commit.files.SuccessData/1","success":true,'
    '"timestamp":1728480100000,"date":"Wed Oct 09 13:21:40 UTC 2024","hostname":"host1",'
    '"committer":"magic","description":"Task committer attempt_202410091320_0001_m_000000_0",'
    '"jobId":"0d1f","jobIdSource":"spark.sql.sources.writeJobUUID","metrics":'
    '{"committer_commits_completed":1},"diagnostics":{"fs.s3a.committer.threads":"8",'
    '"fs.s3a.connection.maximum":"500","fs.s3a.max.total.tasks":"32"},"filenames":'
    '["/out/year=2024/part-0000.csv"],"iostatistics":{"counters":{"committer_commits_completed":1},'
    '"gauges":{},"minimums":{},"maximums":{},"meanstatistics":{}},"state":null,"stage":null}'
)
MANIFEST = """{
  "type" : "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest/1",
  "version" : 1,
  "jobId" : "job_202410091320_0001",
  "jobAttemptNumber" : 0,
  "taskID" : "task_202410091320_0001_m_000000",
  "taskAttemptID" : "attempt_202410091320_0001_m_000000_0",
  "taskAttemptDir" : "abfs://c@acct.dfs.core.windows.net/out/_temporary/job_202410091320_0001/00/tasks/attempt_202410091320_0001_m_000000_0",
  "files" : [ {
    "s" : "abfs://c@acct.dfs.core.windows.net/out/_temporary/job_202410091320_0001/00/tasks/attempt_202410091320_0001_m_000000_0/year=2024/part-0000",
    "d" : "abfs://c@acct.dfs.core.windows.net/out/year=2024/part-0000",
    "z" : 21,
    "e" : "0x8DCE84A2B4F31C2"
  } ],
  "directories" : [ { "d" : "abfs://c@acct.dfs.core.windows.net/out/year=2024", "t" : 1, "l" : 1 } ],
  "extraData" : { },
  "iostatistics" : { "counters" : { }, "gauges" : { }, "minimums" : { }, "maximums" : { }, "meanstatistics" : { } }
}"""
MANIFEST_SUCCESS = """{
  "name" : "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1",
  "timestamp" : 1728480100000,
  "success" : true,
  "date" : "2024-10-09T13:21:40.003+01:00[Europe/London]",
  "hostname" : "host1",
  "committer" : "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter",
  "jobId" : "job_202410091320_0001",
  "jobIdSource" : "JobID",
  "metrics" : { },
  "diagnostics" : { "principal" : "alice", "stage" : "committer_commit_job" },
  "filenames" : [ "abfs://c@acct.dfs.core.windows.net/out/year=2024/part-0000" ],
  "iostatistics" : { "counters" : { "committer_files_committed" : 1, "committer_bytes_committed" : 21 }, "gauges" : { }, "minimums" : { }, "maximums" : { }, "meanstatistics" : { } }
}"""
IOSTATS = (
    '{"counters":{"committer_commits_completed":1,"committer_materialize_file":1},"gauges":{},'
    '"minimums":{"committer_materialize_file.min":112},"maximums":{"committer_materialize_file.max":112},'
    '"meanstatistics":{"committer_materialize_file.mean":{"samples":1,"sum":112}}}'
)
