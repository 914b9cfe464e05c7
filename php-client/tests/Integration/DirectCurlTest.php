<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Integration;

use TransferSidecar\DirectCurl;
use TransferSidecar\Exception\TransferException;

/**
 * The php-curl baseline against the real Apache mod_dav and WebHDFS: bytes and sha256 of what
 * arrives, and what each mode costs in PHP memory (8 MiB file).
 */
final class DirectCurlTest extends IntegrationTestCase
{
    private const SIZE = 8 << 20;

    /** @return iterable<string, array{0: string, 1: string}> */
    public static function backendsAndModes(): iterable
    {
        foreach (['http', 'webhdfs'] as $backend) {
            foreach (['buffered', 'streamed'] as $mode) {
                yield "$backend $mode" => [$backend, $mode];
            }
        }
    }

    /** @dataProvider backendsAndModes */
    public function testUploadThenDownloadInTheSameMode(string $backend, string $mode): void
    {
        $curl = new DirectCurl(self::unixClient());
        [$src, $sha] = self::makeFile("direct-$backend-$mode.src", self::SIZE);
        $back = static::$dir . "/direct-$backend-$mode.back";
        $name = sprintf('php-direct-%s-%s-%s.bin', self::$run, $backend, $mode);

        $before = memory_get_usage();
        $up = $backend === 'http'
            ? $curl->uploadHttp(self::env('HTTPD_UPLOAD_URL') . $name, $src, $mode)
            : $curl->uploadWebHdfs(self::env('WEBHDFS_NAMENODE'), self::env('WEBHDFS_USER'), rtrim(self::env('WEBHDFS_BASE'), '/') . '/' . $name, $src, $mode);
        $upMemory = $up['peakMemoryBytes'] - $before;

        $before = memory_get_usage();
        $down = $backend === 'http'
            ? $curl->downloadHttp(self::env('HTTPD_UPLOAD_URL') . $name, $back, $mode)
            : $curl->downloadWebHdfs(self::env('WEBHDFS_NAMENODE'), self::env('WEBHDFS_USER'), rtrim(self::env('WEBHDFS_BASE'), '/') . '/' . $name, $back, $mode);
        $downMemory = $down['peakMemoryBytes'] - $before;

        self::assertSame(['upload', $backend, $mode, self::SIZE, 'succeeded'], [$up['direction'], $up['backend'], $up['mode'], $up['bytes'], $up['outcome']]);
        self::assertSame(['download', $backend, $mode, self::SIZE, 'succeeded'], [$down['direction'], $down['backend'], $down['mode'], $down['bytes'], $down['outcome']]);
        self::assertGreaterThan(0, $up['seconds']);
        self::assertSame(self::SIZE, filesize($back));
        self::assertSame($sha, hash_file('sha256', $back));
        fwrite(STDERR, sprintf("\n[direct] %s %s: up %.0f MiB/s, %.1f MiB peak above baseline; down %.0f MiB/s, %.1f MiB\n", $backend, $mode,
            self::SIZE / $up['seconds'] / 1048576, $upMemory / 1048576, self::SIZE / $down['seconds'] / 1048576, $downMemory / 1048576));

        if ($mode === 'buffered') {
            self::assertGreaterThanOrEqual(self::SIZE, $downMemory, 'RETURNTRANSFER holds the whole file');
            self::assertGreaterThanOrEqual(self::SIZE, $upMemory, 'file_get_contents holds the whole file');
        } else {
            self::assertLessThan(self::SIZE / 8, $downMemory, 'CURLOPT_FILE streams');
            self::assertLessThan(self::SIZE / 8, $upMemory, 'CURLOPT_INFILE streams');
        }
        unlink($src);
        unlink($back);
    }

    /**
     * php-curl's handle keeps its own reference to a RETURNTRANSFER answer until its next
     * curl_exec(): the file-sized string outlived the buffered call, and counted in the peak of
     * the streamed call after it (and in its sidecar_php_peak_memory_bytes). The connection is
     * still reused (one share for the object's handles).
     */
    public function testAStreamedUploadSendsTheFilesSizeNowNotTheOnePhpCachedBefore(): void
    {
        $curl = new DirectCurl(self::unixClient());
        $file = static::$dir . '/direct-resized.bin';
        $url = self::env('HTTPD_UPLOAD_URL') . sprintf('php-direct-%s-resized.bin', self::$run);
        file_put_contents($file, str_repeat('a', 1000));
        $curl->uploadHttp($url, $file, 'streamed'); // PHP caches the file's stat
        file_put_contents($file, str_repeat('b', 100000)); // a write does not clear that cache
        $curl->uploadHttp($url, $file, 'streamed'); // before: Content-Length 1000, then "sent 100000 of 1000 bytes"
        $back = static::$dir . '/direct-resized.back';
        $curl->downloadHttp($url, $back, 'streamed');
        clearstatcache();
        self::assertSame(str_repeat('b', 100000), file_get_contents($back));
    }

    public function testABufferedDownloadLeavesNothingBehindForTheNextCall(): void
    {
        $curl = new DirectCurl();
        [$src] = self::makeFile('direct-after-buffered.src', self::SIZE);
        $url = self::env('HTTPD_UPLOAD_URL') . sprintf('php-direct-%s-after-buffered.bin', self::$run);
        $back = static::$dir . '/direct-after-buffered.back';
        $curl->uploadHttp($url, $src, 'streamed');
        $before = memory_get_usage();
        $curl->downloadHttp($url, $back, 'buffered');
        self::assertLessThan(self::SIZE / 8, memory_get_usage() - $before, 'the answer is freed when the call returns');
        $streamed = $curl->downloadHttp($url, $back, 'streamed');
        self::assertLessThan(self::SIZE / 8, $streamed['peakMemoryBytes'] - $before, 'the streamed call\'s peak holds no earlier answer');
        unlink($src);
        unlink($back);
    }

    public function testAFailedTransferIsReportedThenThrown(): void
    {
        $curl = new DirectCurl(self::unixClient());
        $local = static::$dir . '/direct-missing.bin';
        foreach (['buffered', 'streamed'] as $mode) {
            try {
                $curl->downloadHttp(self::env('HTTPD_UPLOAD_URL') . 'no-such-file-' . self::$run, $local, $mode);
                self::fail('no exception');
            } catch (TransferException $e) {
                self::assertStringContainsString('HTTP 404', $e->getMessage());
                self::assertSame(['failed', 'download', 'http', $mode], [$e->getResult()['outcome'], $e->getResult()['direction'], $e->getResult()['backend'], $e->getResult()['mode']]);
                self::assertFileDoesNotExist($local);
            }
        }
        try {
            $curl->downloadWebHdfs(self::env('WEBHDFS_NAMENODE'), self::env('WEBHDFS_USER'), '/no/such/file-' . self::$run, $local, 'streamed');
            self::fail('no exception');
        } catch (TransferException $e) {
            self::assertStringContainsString('HTTP 404', $e->getMessage());
        }
        try {
            $name = rtrim(self::env('WEBHDFS_BASE'), '/') . '/exists-' . self::$run;
            [$src] = self::makeFile('direct-exists.bin', 10);
            $curl->uploadWebHdfs(self::env('WEBHDFS_NAMENODE'), self::env('WEBHDFS_USER'), $name, $src, 'streamed');
            $curl->uploadWebHdfs(self::env('WEBHDFS_NAMENODE'), self::env('WEBHDFS_USER'), $name, $src, 'streamed', false);
            self::fail('no exception');
        } catch (TransferException $e) {
            self::assertStringContainsString('FileAlreadyExistsException', $e->getMessage());
        }
    }

    public function testObservationsReachTheDaemonsMetrics(): void
    {
        $curl = new DirectCurl(self::tcpClient());
        [$src] = self::makeFile('direct-observed.bin', 1000);
        $curl->uploadHttp(self::env('HTTPD_UPLOAD_URL') . 'php-observed-' . self::$run . '.bin', $src, 'streamed');
        self::assertMetric('sidecar_transfers_total', ['via' => 'php_curl', 'backend' => 'http', 'direction' => 'upload', 'mode' => 'streamed', 'outcome' => 'succeeded']);
        self::assertMetric('sidecar_transfer_bytes_total', ['via' => 'php_curl', 'backend' => 'http', 'mode' => 'streamed']);
        self::assertMetric('sidecar_transfers_total', ['via' => 'php_curl', 'outcome' => 'failed']);
    }
}
