import java.io.File;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.statistics.IOStatistics;
import org.apache.hadoop.fs.statistics.IOStatisticsSnapshot;
import org.apache.hadoop.fs.statistics.MeanStatistic;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.AbstractManifestData;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.DirEntry;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.EntryStatus;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.FileEntry;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.ManifestSuccessData;
import org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest;

/**
 * Reads and writes the manifest committer's records with Hadoop's own classes, so that
 * magicfs's tests can check that Hadoop accepts what magicfs writes, and the reverse.
 *
 * <pre>
 *   java HadoopRecords manifest|success PATH          load PATH, validate(), describe it
 *   java HadoopRecords --save manifest|success PATH   build a sample record, save it to PATH,
 *                                                     describe what was saved
 * </pre>
 *
 * The description is one line of JSON on stdout (non-ASCII escaped, so the platform
 * encoding cannot garble it). A record Hadoop refuses ends the program with exit code 1
 * and, on stderr, a line {@code HadoopRecords-error: <exception class>: <message>}.
 */
public final class HadoopRecords {

    static final String ERROR_PREFIX = "HadoopRecords-error: ";

    /** Destination of the sample records; the test on the Python side expects these values. */
    static final Path SAMPLE_DEST = new Path("abfs://c@acct.dfs.core.windows.net/out");
    static final String SAMPLE_JOB = "job_202611220000_0007";
    static final String SAMPLE_TASK = "task_202611220000_0007_m_000003";
    static final String SAMPLE_ATTEMPT = "attempt_202611220000_0007_m_000003_1";
    /** A space, Latin-1 and non-Latin-1 unicode, and characters a URI must escape. */
    static final String[] SAMPLE_FILES = {
        "year=2024/a b \u00fc\u20ac.csv", "odd/50% #1 [x]+y.csv", "part-0000"
    };

    private HadoopRecords() {
    }

    public static void main(String[] args) {
        boolean save = args.length == 3 && args[0].equals("--save");
        if (args.length != (save ? 3 : 2)) {
            System.err.println("usage: HadoopRecords [--save] manifest|success PATH");
            System.exit(2);
        }
        String kind = args[save ? 1 : 0];
        Path path = new Path(new File(args[save ? 2 : 1]).getAbsoluteFile().toURI());
        try {
            FileSystem fs = FileSystem.getLocal(new Configuration()).getRaw();
            Map<String, Object> description = save ? save(kind, fs, path) : load(kind, fs, path);
            System.out.println(JsonMapper.builder()
                .enable(JsonWriteFeature.ESCAPE_NON_ASCII)
                .build()
                .writeValueAsString(description));
        } catch (Exception e) {
            System.err.println(ERROR_PREFIX + e.getClass().getName() + ": " + e.getMessage());
            System.exit(1);
        }
    }

    static Map<String, Object> load(String kind, FileSystem fs, Path path) throws Exception {
        switch (kind) {
            case "manifest":
                return describe(TaskManifest.load(fs, path).validate());
            case "success":
                return describe(ManifestSuccessData.load(fs, path).validate());
            default:
                throw new IllegalArgumentException("unknown kind " + kind);
        }
    }

    static Map<String, Object> save(String kind, FileSystem fs, Path path) throws Exception {
        AbstractManifestData<?> record;
        switch (kind) {
            case "manifest":
                record = sampleManifest();
                break;
            case "success":
                record = sampleSuccess();
                break;
            default:
                throw new IllegalArgumentException("unknown kind " + kind);
        }
        record.save(fs, path, true); // save() sets the name constant of a success record
        record.validate();
        return kind.equals("manifest")
            ? describe((TaskManifest) record) : describe((ManifestSuccessData) record);
    }

    /** A manifest as a task attempt of Hadoop's manifest committer would save it. */
    static TaskManifest sampleManifest() {
        Path attemptDir = new Path(SAMPLE_DEST,
            "_temporary/" + SAMPLE_JOB + "/01/tasks/" + SAMPLE_ATTEMPT);
        TaskManifest manifest = new TaskManifest();
        manifest.setJobId(SAMPLE_JOB);
        manifest.setJobAttemptNumber(1);
        manifest.setTaskID(SAMPLE_TASK);
        manifest.setTaskAttemptID(SAMPLE_ATTEMPT);
        manifest.setTaskAttemptDir(AbstractManifestData.marshallPath(attemptDir));
        long size = 21;
        for (String name : SAMPLE_FILES) {
            String etag = name.startsWith("part-") ? null : "\"0x8DCE84A2B4F31C" + size + "\"";
            manifest.addFileToCommit(
                new FileEntry(new Path(attemptDir, name), new Path(SAMPLE_DEST, name), size, etag));
            size += 1;
        }
        manifest.addDirectory(
            DirEntry.dirEntry(new Path(SAMPLE_DEST, "year=2024"), EntryStatus.not_found, 1));
        manifest.addDirectory(
            DirEntry.dirEntry(new Path(SAMPLE_DEST, "odd"), EntryStatus.dir, 1));
        manifest.getExtraData().put("written.by", "HadoopRecords");
        manifest.setIOStatistics(sampleStatistics());
        return manifest;
    }

    /** A job summary as Hadoop's manifest committer would save it as {@code _SUCCESS}. */
    static ManifestSuccessData sampleSuccess() {
        ManifestSuccessData success = new ManifestSuccessData();
        success.setSuccess(true);
        success.setTimestamp(1795305600000L);
        success.setDate("2026-11-22T00:00:00Z[UTC]");
        success.setHostname("host1");
        success.setCommitter(ManifestCommitter.class.getName());
        success.setJobId(SAMPLE_JOB);
        success.setJobIdSource("JobID");
        success.putDiagnostic("stage", "committer_commit_job");
        List<Path> filenames = new ArrayList<>();
        for (String name : SAMPLE_FILES) {
            filenames.add(new Path(SAMPLE_DEST, name));
        }
        success.setFilenamePaths(filenames);
        success.setIOStatistics(sampleStatistics());
        return success;
    }

    static IOStatisticsSnapshot sampleStatistics() {
        IOStatisticsSnapshot statistics = new IOStatisticsSnapshot();
        statistics.setCounter("committer_files_committed", SAMPLE_FILES.length);
        statistics.setCounter("op_rename", 3);
        statistics.setMinimum("op_rename.min", 4);
        statistics.setMaximum("op_rename.max", 9);
        statistics.setMeanStatistic("op_rename.mean", new MeanStatistic(3, 18));
        return statistics;
    }

    static Map<String, Object> describe(TaskManifest manifest) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("type", manifest.getType());
        out.put("version", manifest.getVersion());
        out.put("jobId", manifest.getJobId());
        out.put("jobAttemptNumber", manifest.getJobAttemptNumber());
        out.put("taskID", manifest.getTaskID());
        out.put("taskAttemptID", manifest.getTaskAttemptID());
        out.put("taskAttemptDir", manifest.getTaskAttemptDir());
        List<Map<String, Object>> files = new ArrayList<>();
        for (FileEntry entry : manifest.getFilesToCommit()) {
            Map<String, Object> file = new LinkedHashMap<>();
            file.put("source", entry.getSource());
            file.put("dest", entry.getDest());
            file.put("size", entry.getSize());
            file.put("etag", entry.getEtag());
            // How Hadoop decodes the URI into a Path: what it would rename the file to.
            file.put("destPath", entry.getDestPath().toUri().getPath());
            file.put("destName", entry.getDestPath().getName());
            files.add(file);
        }
        out.put("files", files);
        List<Map<String, Object>> dirs = new ArrayList<>();
        for (DirEntry entry : manifest.getDestDirectories()) {
            Map<String, Object> dir = new LinkedHashMap<>();
            dir.put("dir", entry.getDir());
            dir.put("status", entry.getStatus().name());
            dir.put("level", entry.getLevel());
            dirs.add(dir);
        }
        out.put("directories", dirs);
        out.put("totalFileSize", manifest.getTotalFileSize());
        out.put("extraData", new TreeMap<>(manifest.getExtraData()));
        out.put("iostatistics", describe(manifest.getIOStatistics()));
        return out;
    }

    static Map<String, Object> describe(ManifestSuccessData success) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("name", success.getName());
        out.put("success", success.getSuccess());
        out.put("timestamp", success.getTimestamp());
        out.put("date", success.getDate());
        out.put("hostname", success.getHostname());
        out.put("committer", success.getCommitter());
        out.put("description", success.getDescription());
        out.put("jobId", success.getJobId());
        out.put("jobIdSource", success.getJobIdSource());
        out.put("state", success.getState());
        out.put("stage", success.getStage());
        out.put("metrics", new TreeMap<>(success.getMetrics()));
        out.put("diagnostics", new TreeMap<>(success.getDiagnostics()));
        out.put("filenames", success.getFilenames());
        // Hadoop's reading of each filename as a URI. S3A writes raw "/key" names, which
        // fail this when a key has a character a URI must escape: say so, do not fail.
        try {
            List<String> paths = new ArrayList<>();
            for (Path filename : success.getFilenamePaths()) {
                paths.add(filename.toUri().getPath());
            }
            out.put("filenamePaths", paths);
        } catch (RuntimeException e) {
            out.put("filenamePaths", null);
            out.put("filenamePathsError", e.getMessage());
        }
        out.put("iostatistics", describe(success.getIOStatistics()));
        return out;
    }

    static Map<String, Object> describe(IOStatistics statistics) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("counters", new TreeMap<>(statistics.counters()));
        out.put("gauges", new TreeMap<>(statistics.gauges()));
        out.put("minimums", new TreeMap<>(statistics.minimums()));
        out.put("maximums", new TreeMap<>(statistics.maximums()));
        Map<String, Object> means = new TreeMap<>();
        for (Map.Entry<String, MeanStatistic> mean : statistics.meanStatistics().entrySet()) {
            Map<String, Object> value = new LinkedHashMap<>();
            value.put("samples", mean.getValue().getSamples());
            value.put("sum", mean.getValue().getSum());
            means.put(mean.getKey(), value);
        }
        out.put("meanstatistics", means);
        return out;
    }
}
