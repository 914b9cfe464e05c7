<?php

declare(strict_types=1);

namespace TransferSidecar;

use TransferSidecar\Exception\InvalidArgumentException;
use TransferSidecar\Exception\SpoolException;

/**
 * The fallback when the daemon cannot take a job: the job body (with its id) goes to
 * `<dir>/<id>.json`, written to a hidden temp file, fsync'd and renamed, so the daemon never sees
 * a partial file; the directory is fsync'd after the rename. The daemon submits those files like POSTed jobs and deletes them; the id makes a
 * job that was both accepted over the socket and spooled run once.
 *
 * The directory must be writable by PHP and by the daemon (it deletes the files), e.g. owned by
 * the daemon's user, group www-data, mode 2770.
 */
final class Spool
{
    private string $dir;

    public function __construct(string $dir)
    {
        if ($dir === '' || str_contains($dir, "\0")) {
            throw new InvalidArgumentException('spool: must be a directory path');
        }
        $this->dir = rtrim($dir, '/');
        if ($this->dir === '') {
            $this->dir = '/';
        }
    }

    public function dir(): string
    {
        return $this->dir;
    }

    public function pathFor(string $id): string
    {
        return $this->dir . '/' . $id . '.json';
    }

    /**
     * Writes the encoded job body atomically; returns the final path. $json is the whole job as
     * POST /v1/jobs takes it, with "id": $id (the daemon rejects a file whose name is not its id).
     */
    public function write(string $id, string $json): string
    {
        if (!JobId::isValid($id)) {
            throw new InvalidArgumentException(sprintf('spool: job id %s does not match %s', json_encode($id), JobId::PATTERN));
        }
        $job = json_decode($json, true);
        if (!is_array($job) || ($job['id'] ?? null) !== $id) {
            throw new InvalidArgumentException(sprintf('spool: the job body must be a JSON object with "id": %s', json_encode($id)));
        }
        $final = $this->pathFor($id);
        $temp = sprintf('%s/.tmp-%s-%s', $this->dir, $id, bin2hex(random_bytes(6)));
        // Our own error handler while we work: the file functions' warnings say why they failed,
        // and an application's handler (a framework's) may swallow them before error_get_last().
        $warning = null;
        set_error_handler(static function (int $level, string $message) use (&$warning): bool {
            $warning = $message;
            return true;
        });
        $why = static function () use (&$warning): string {
            return $warning ?? 'unknown error';
        };
        $handle = null;
        try {
            // 0640 before a byte of the job is in it (fopen makes it 0666 less the umask, often
            // 0644): the body names local paths and the callback URL.
            $mask = umask(0027);
            try {
                $handle = fopen($temp, 'xb');
            } finally {
                umask($mask);
            }
            if ($handle === false) {
                $handle = null;
                throw new SpoolException(sprintf('cannot create %s: %s', $temp, $why()));
            }
            if (!chmod($temp, 0640)) {
                throw new SpoolException(sprintf('cannot chmod %s: %s', $temp, $why()));
            }
            $length = strlen($json);
            for ($written = 0; $written < $length;) {
                $n = fwrite($handle, substr($json, $written));
                if ($n === false || $n === 0) {
                    throw new SpoolException(sprintf('cannot write %s: %s', $temp, $why()));
                }
                $written += $n;
            }
            // The rename must not become visible before the data is on disk.
            if (!fflush($handle) || !fsync($handle)) {
                throw new SpoolException(sprintf('cannot fsync %s: %s', $temp, $why()));
            }
            $closed = fclose($handle);
            $handle = null;
            if (!$closed) {
                throw new SpoolException(sprintf('cannot close %s: %s', $temp, $why()));
            }
            if (!rename($temp, $final)) {
                throw new SpoolException(sprintf('cannot publish %s: %s', $final, $why()));
            }
            // The rename itself must reach the disk, or a power cut can leave only the hidden temp
            // file, which the daemon never reads. Best effort: the job is published already, and a
            // directory PHP may not open for reading must not turn a written job into a failure.
            $directory = fopen($this->dir, 'r');
            if ($directory !== false) {
                fsync($directory);
                fclose($directory);
            }
        } catch (\Throwable $e) {
            if ($handle !== null) {
                fclose($handle);
            }
            if (file_exists($temp)) {
                unlink($temp);
            }
            throw $e;
        } finally {
            restore_error_handler();
        }
        return $final;
    }
}
