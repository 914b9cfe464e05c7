<?php

declare(strict_types=1);

namespace TransferSidecar;

use TransferSidecar\Exception\InvalidArgumentException;
use TransferSidecar\Exception\TransferException;

/**
 * The baseline: how PHP moves files today, with php-curl inside the request, measured.
 *
 * Modes:
 *  - "buffered": downloads with CURLOPT_RETURNTRANSFER then file_put_contents (the whole file in
 *    PHP memory), uploads with file_get_contents + CURLOPT_POSTFIELDS;
 *  - "streamed": downloads with CURLOPT_FILE, uploads with CURLOPT_UPLOAD + CURLOPT_INFILE
 *    (constant memory).
 *
 * Every call returns (and reports to the daemon's /metrics with via="php_curl", when a reporter
 * is given) ['direction', 'backend', 'mode', 'bytes', 'seconds', 'peakMemoryBytes', 'outcome'].
 * A failed transfer is reported with outcome "failed", then a TransferException is thrown.
 * Needs ext-curl.
 */
final class DirectCurl
{
    private ?Client $reporter;
    private ?\CurlHandle $handle = null;
    private ?\CurlShareHandle $connections = null;
    private float $connectTimeout;

    public function __construct(?Client $reporter = null, float $connectTimeout = 10.0)
    {
        if (!extension_loaded('curl')) {
            throw new InvalidArgumentException('DirectCurl needs the curl extension (ext-curl, Debian: php-curl)');
        }
        $this->reporter = $reporter;
        $this->connectTimeout = $connectTimeout;
    }

    /** @return array<string, mixed> */
    public function downloadHttp(string $url, string $local, string $mode): array
    {
        return $this->measure('download', 'http', $mode, fn (): int => $this->get($url, $local, $mode));
    }

    /** @return array<string, mixed> */
    public function uploadHttp(string $url, string $local, string $mode): array
    {
        return $this->measure('upload', 'http', $mode, fn (): int => $this->put($url, $local, $mode, [200, 201, 204]));
    }

    /**
     * WebHDFS OPEN on the namenode, following its redirect to a datanode.
     *
     * @return array<string, mixed>
     */
    public function downloadWebHdfs(string $namenode, string $user, string $hdfsPath, string $local, string $mode): array
    {
        $url = self::webHdfsUrl($namenode, $hdfsPath, ['op' => 'OPEN', 'user.name' => $user]);
        return $this->measure('download', 'webhdfs', $mode, fn (): int => $this->get($url, $local, $mode));
    }

    /**
     * WebHDFS CREATE in two steps: PUT to the namenode with noredirect=true answers the datanode
     * URL as JSON {"Location": ...}; the body is PUT there (201 Created). Datanodes answer every PUT
     * with an unsolicited "100 Continue", which curl handles.
     *
     * @return array<string, mixed>
     */
    public function uploadWebHdfs(string $namenode, string $user, string $hdfsPath, string $local, string $mode, bool $overwrite = true): array
    {
        $url = self::webHdfsUrl($namenode, $hdfsPath, [
            'op' => 'CREATE',
            'user.name' => $user,
            'overwrite' => $overwrite ? 'true' : 'false',
            'noredirect' => 'true',
        ]);
        return $this->measure('upload', 'webhdfs', $mode, function () use ($url, $local, $mode): int {
            $ch = $this->handle();
            curl_setopt_array($ch, [
                CURLOPT_URL => $url,
                CURLOPT_CUSTOMREQUEST => 'PUT',
                CURLOPT_POSTFIELDS => '',
                CURLOPT_RETURNTRANSFER => true,
            ]);
            $answer = curl_exec($ch);
            $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
            if ($answer === false) {
                throw new TransferException(sprintf('WebHDFS CREATE on the namenode failed: %s', curl_error($ch)));
            }
            $location = json_decode((string) $answer, true)['Location'] ?? null;
            if ($status !== 200 || !is_string($location)) {
                throw new TransferException(sprintf('WebHDFS CREATE on the namenode answered HTTP %d: %s', $status, self::remoteError((string) $answer)));
            }
            return $this->put($location, $local, $mode, [201]);
        });
    }

    /**
     * @param callable(): int $transfer returns the bytes moved
     * @return array<string, mixed>
     */
    private function measure(string $direction, string $backend, string $mode, callable $transfer): array
    {
        if ($mode !== 'buffered' && $mode !== 'streamed') {
            throw new InvalidArgumentException(sprintf('mode: must be "buffered" or "streamed", got %s', json_encode($mode)));
        }
        if (function_exists('memory_reset_peak_usage')) {
            memory_reset_peak_usage();
        }
        $started = hrtime(true);
        $bytes = 0;
        $failure = null;
        try {
            $bytes = $transfer();
        } catch (TransferException $e) {
            $failure = $e;
        }
        $result = [
            'direction' => $direction,
            'backend' => $backend,
            'mode' => $mode,
            'bytes' => $bytes,
            'seconds' => (hrtime(true) - $started) / 1e9,
            'peakMemoryBytes' => memory_get_peak_usage(),
            'outcome' => $failure === null ? 'succeeded' : 'failed',
        ];
        try {
            $this->reporter?->observe(['type' => 'transfer', 'via' => 'php_curl'] + $result);
        } catch (\Throwable) {
            // reporting never breaks the caller
        }
        if ($failure !== null) {
            throw $failure->withResult($result);
        }
        return $result;
    }

    /** GET $url into $local; returns the bytes written. */
    private function get(string $url, string $local, string $mode): int
    {
        $ch = $this->handle();
        curl_setopt_array($ch, [CURLOPT_URL => $url, CURLOPT_FOLLOWLOCATION => true, CURLOPT_MAXREDIRS => 5]);
        if ($mode === 'buffered') {
            curl_setopt($ch, CURLOPT_RETURNTRANSFER, true);
            $data = curl_exec($ch);
            $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
            if ($data === false) {
                throw new TransferException(sprintf('GET %s failed: %s', self::redact($url), curl_error($ch)));
            }
            if ($status !== 200) {
                throw new TransferException(sprintf('GET %s answered HTTP %d: %s', self::redact($url), $status, self::remoteError((string) $data)));
            }
            // The handle keeps its own reference to the answer until its next curl_exec(), which
            // curl_reset() does not drop: without this the file-sized string would outlive the
            // call, and count in the next call's peak. Its connections stay in the share.
            $this->handle = null;
            $bytes = strlen((string) $data);
            if (@file_put_contents($local, $data) !== $bytes) {
                @unlink($local);
                throw new TransferException(sprintf('cannot write %s: %s', $local, error_get_last()['message'] ?? 'unknown error'));
            }
            return $bytes;
        }
        error_clear_last();
        $file = @fopen($local, 'wb');
        if ($file === false) {
            throw new TransferException(sprintf('cannot open %s: %s', $local, error_get_last()['message'] ?? 'unknown error'));
        }
        curl_setopt($ch, CURLOPT_FILE, $file);
        $ok = curl_exec($ch);
        $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
        $bytes = (int) curl_getinfo($ch, CURLINFO_SIZE_DOWNLOAD_T);
        $error = curl_error($ch);
        curl_reset($ch); // lets go of the file handle
        $closed = fclose($file);
        if ($ok === false || $status !== 200 || !$closed) {
            @unlink($local);
            throw new TransferException(sprintf('GET %s %s', self::redact($url), $ok === false ? 'failed: ' . $error : ($closed ? 'answered HTTP ' . $status : 'could not close ' . $local)));
        }
        return $bytes;
    }

    /**
     * PUT $local to $url; returns the bytes sent.
     *
     * @param list<int> $expected statuses that mean success
     */
    private function put(string $url, string $local, string $mode, array $expected): int
    {
        error_clear_last();
        clearstatcache(true, $local); // PHP caches a path's stat: a file rewritten since would send its old size
        $size = @filesize($local);
        if ($size === false) {
            throw new TransferException(sprintf('cannot stat %s: %s', $local, error_get_last()['message'] ?? 'unknown error'));
        }
        $ch = $this->handle();
        curl_setopt_array($ch, [
            CURLOPT_URL => $url,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_HTTPHEADER => ['Content-Type: application/octet-stream'],
        ]);
        $file = null;
        if ($mode === 'buffered') {
            $data = @file_get_contents($local);
            if ($data === false) {
                throw new TransferException(sprintf('cannot read %s: %s', $local, error_get_last()['message'] ?? 'unknown error'));
            }
            curl_setopt_array($ch, [CURLOPT_CUSTOMREQUEST => 'PUT', CURLOPT_POSTFIELDS => $data]);
            $size = strlen($data);
        } else {
            $file = @fopen($local, 'rb');
            if ($file === false) {
                throw new TransferException(sprintf('cannot open %s: %s', $local, error_get_last()['message'] ?? 'unknown error'));
            }
            curl_setopt_array($ch, [CURLOPT_UPLOAD => true, CURLOPT_INFILE => $file, CURLOPT_INFILESIZE => $size]);
        }
        $answer = curl_exec($ch);
        $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
        $sent = (int) curl_getinfo($ch, CURLINFO_SIZE_UPLOAD_T);
        $error = curl_error($ch);
        unset($data);
        if ($file !== null) {
            curl_reset($ch);
            fclose($file);
        }
        if ($answer === false) {
            throw new TransferException(sprintf('PUT %s failed: %s', self::redact($url), $error));
        }
        if (!in_array($status, $expected, true)) {
            throw new TransferException(sprintf('PUT %s answered HTTP %d: %s', self::redact($url), $status, self::remoteError((string) $answer)));
        }
        if ($sent !== $size) {
            throw new TransferException(sprintf('PUT %s sent %d of %d bytes', self::redact($url), $sent, $size));
        }
        return $sent;
    }

    /**
     * One handle per object, reset between requests; its connections are kept alive in a share
     * (CURL_LOCK_DATA_CONNECT), so they outlive a handle dropped after a buffered download.
     */
    private function handle(): \CurlHandle
    {
        if ($this->connections === null) {
            $this->connections = curl_share_init();
            curl_share_setopt($this->connections, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
        }
        if ($this->handle === null) {
            $handle = curl_init();
            if ($handle === false) {
                throw new TransferException('curl_init() failed');
            }
            $this->handle = $handle;
        } else {
            curl_reset($this->handle);
        }
        curl_setopt($this->handle, CURLOPT_SHARE, $this->connections);
        curl_setopt($this->handle, CURLOPT_CONNECTTIMEOUT_MS, (int) ($this->connectTimeout * 1000));
        return $this->handle;
    }

    /** @param array<string, string> $query */
    private static function webHdfsUrl(string $namenode, string $hdfsPath, array $query): string
    {
        if (preg_match('#^https?://[^/?\#\s]+/?$#', $namenode) !== 1) {
            throw new InvalidArgumentException(sprintf('namenode: must be like "http://nn1:9870", got %s', json_encode($namenode)));
        }
        if ($hdfsPath === '' || $hdfsPath[0] !== '/') {
            throw new InvalidArgumentException(sprintf('hdfsPath: must be absolute, got %s', json_encode($hdfsPath)));
        }
        $segments = array_map('rawurlencode', array_values(array_filter(explode('/', $hdfsPath), static fn (string $s): bool => $s !== '')));
        return rtrim($namenode, '/') . '/webhdfs/v1/' . implode('/', $segments) . '?' . http_build_query($query, '', '&', PHP_QUERY_RFC3986);
    }

    /** The message of a WebHDFS RemoteException, or the start of the body. */
    private static function remoteError(string $body): string
    {
        $remote = json_decode($body, true)['RemoteException'] ?? null;
        if (is_array($remote)) {
            return sprintf('%s: %s', $remote['exception'] ?? 'RemoteException', strtok((string) ($remote['message'] ?? ''), "\n"));
        }
        return trim(substr(strip_tags($body), 0, 200));
    }

    /** URLs in messages without the query (it may carry a delegation token). */
    private static function redact(string $url): string
    {
        return strtok($url, '?');
    }
}
