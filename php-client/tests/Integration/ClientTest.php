<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Integration;

use TransferSidecar\Exception\JobNotFoundException;
use TransferSidecar\Exception\RequestException;
use TransferSidecar\JobId;

final class ClientTest extends IntegrationTestCase
{
    public function testManyCallsOnOneClientReuseItsConnection(): void
    {
        foreach ([self::unixClient(), self::tcpClient(), self::unixClient(['protocol' => 'http']), self::tcpClient(['protocol' => 'http'])] as $client) {
            [$src] = self::makeFile('reuse-' . bin2hex(random_bytes(3)), 10);
            $ids = [];
            for ($i = 0; $i < 50; $i++) {
                $ids[] = $client->upload('local', $src, sprintf('/php/%s/reuse/%s.bin', self::$run, bin2hex(random_bytes(6))));
            }
            foreach ($ids as $id) {
                self::assertSame($id, $client->status($id)['id']);
                self::assertSucceeds($client, $id);
            }
            self::assertCount(50, array_unique($ids));
        }
    }

    /** Clients one after another on one kept connection, as the requests of one php-fpm worker. */
    public function testPersistentClientsShareOneConnectionToTheDaemon(): void
    {
        foreach ([fn () => self::unixClient(['persistent' => true]), fn () => self::tcpClient(['persistent' => true])] as $make) {
            [$src] = self::makeFile('persistent-' . bin2hex(random_bytes(3)), 10);
            $ids = [];
            for ($i = 0; $i < 20; $i++) {
                $ids[] = $make()->upload('local', $src, sprintf('/php/%s/persistent/%s.bin', self::$run, bin2hex(random_bytes(6))));
            }
            $client = $make();
            foreach ($ids as $id) {
                self::assertSucceeds($client, $id);
            }
            $client->close();
            self::assertCount(20, array_unique($ids));
        }
    }

    /** @return iterable<string, array{0: string}> */
    public static function protocols(): iterable
    {
        yield 'lines' => ['lines'];
        yield 'http' => ['http'];
        yield 'lines on the hand-off socket' => ['handoff'];
    }

    /** @dataProvider protocols */
    public function testTheCallersOwnIdMakesARetrySafe(string $protocol): void
    {
        $client = $protocol === 'handoff' ? self::handoffClient() : self::unixClient(['protocol' => $protocol]);
        [$src] = self::makeFile('own-id-' . bin2hex(random_bytes(3)), 10);
        $id = 'own-' . bin2hex(random_bytes(8));
        $remote = sprintf('/php/%s/own-id/%s.bin', self::$run, $id);
        self::assertSame($id, $client->upload('local', $src, $remote, ['id' => $id]));
        self::assertSame($id, $client->upload('local', $src, $remote, ['id' => $id])); // a retry: the same job
        self::assertSucceeds($client, $id);
        try {
            $client->upload('local', $src, $remote . '.other', ['id' => $id]);
            self::fail('the same id with another body was accepted');
        } catch (RequestException $e) {
            self::assertSame([409, 'JOB_CONFLICT'], [$e->getStatus(), $e->getErrorCode()]);
        }
    }

    /** @return iterable<string, array{0: string, 1: string, 2: int, 3: string}> */
    public static function refusedJobs(): iterable
    {
        yield 'unknown target' => ['nope', '', 400, 'UNKNOWN_TARGET'];
        yield 'local path outside every root' => ['local', '/etc/hostname', 403, 'PATH_NOT_ALLOWED'];
        yield 'relative local path' => ['local', 'relative/a.bin', 400, 'INVALID_PATH'];
        yield 'missing local file' => ['local', 'MISSING', 422, 'LOCAL_NOT_FOUND'];
    }

    /** @dataProvider refusedJobs */
    public function testA4xxThrowsTheDaemonsCodeAndIsNotSpooled(string $target, string $local, int $status, string $code): void
    {
        $spool = self::tempDir('sidecar-php-spool-');
        if ($local === '') {
            [$local] = self::makeFile('refused-' . bin2hex(random_bytes(3)), 3);
        } elseif ($local === 'MISSING') {
            $local = self::$dir . '/does-not-exist.bin';
        }
        foreach (['lines', 'http'] as $protocol) {
            $client = self::unixClient(['spool' => $spool, 'protocol' => $protocol]);
            try {
                $client->upload($target, $local, '/php/' . self::$run . '/refused.bin');
                self::fail("no exception ($protocol)");
            } catch (RequestException $e) {
                self::assertSame([$status, $code], [$e->getStatus(), $e->getErrorCode()], $e->getMessage());
                self::assertSame([], array_values(array_diff(scandir($spool), ['.', '..'])), 'nothing spooled');
                try {
                    $client->status((string) $e->getJobId());
                    self::fail('the refused job exists');
                } catch (JobNotFoundException) {
                    $this->addToAssertionCount(1);
                }
            }
        }
        rmdir($spool);
    }

    public function testCancelARunningUpload(): void
    {
        $client = self::unixClient();
        [$src] = self::makeFile('cancel.bin', 48 << 20);
        $id = $client->upload('hdfs', $src, '/php/' . self::$run . '/cancel.bin');
        $job = $client->cancel($id);
        self::assertSame('cancelled', $job['state'], json_encode($job));
        self::assertSame('cancelled', $client->status($id)['state']);
        try {
            $client->cancel($id);
            self::fail('cancelled twice');
        } catch (RequestException $e) {
            self::assertSame([409, 'JOB_FINISHED'], [$e->getStatus(), $e->getErrorCode()]);
        }
    }

    public function testUnknownIdsAreJobNotFound(): void
    {
        $client = self::tcpClient();
        foreach (['status' => fn ($id) => $client->status($id), 'wait' => fn ($id) => $client->wait($id, 1), 'cancel' => fn ($id) => $client->cancel($id)] as $what => $call) {
            $id = JobId::generate();
            try {
                $call($id);
                self::fail($what . ' of an unknown id');
            } catch (JobNotFoundException $e) {
                self::assertSame([404, 'JOB_NOT_FOUND', $id], [$e->getStatus(), $e->getErrorCode(), $e->getJobId()]);
            }
        }
    }

    /** The hand-off that reads the 202 loses nothing in a burst (fire-and-forget lost 2/3 in baseline.md). */
    public function testABurstOf2000AckedUploadsLosesNothing(): void
    {
        $client = self::unixClient();
        $files = [];
        for ($i = 0; $i < 2000; $i++) {
            $files[$i] = static::$dir . "/burst-$i.txt";
            file_put_contents($files[$i], "job $i\n");
        }
        $ids = [];
        $times = [];
        foreach ($files as $i => $file) {
            $ids[$i] = $client->upload('local', $file, sprintf('/php/%s/burst/%d.txt', self::$run, $i));
            $times[] = $client->lastHandoffSeconds();
        }
        sort($times);
        fwrite(STDERR, sprintf("\n[burst] 2000 acked uploads over the unix socket: median hand-off %.0f µs, p99 %.0f µs\n",
            $times[1000] * 1e6, $times[1980] * 1e6));

        self::assertCount(2000, array_unique($ids));
        $succeeded = 0;
        foreach ($ids as $id) {
            $succeeded += $client->wait($id, 120)['state'] === 'succeeded' ? 1 : 0;
        }
        self::assertSame(2000, $succeeded, 'lost or failed: ' . (2000 - $succeeded));
        foreach ($files as $file) {
            unlink($file);
        }
    }

    public function testSendHandsOverASingleJobWithoutReading(): void
    {
        foreach ([self::unixClient(), self::tcpClient(), self::unixClient(['protocol' => 'http'])] as $client) {
            [$src, $sha] = self::makeFile('send-' . bin2hex(random_bytes(3)), 4321);
            $id = $client->send('upload', 'local', $src, sprintf('/php/%s/send/%s.bin', self::$run, bin2hex(random_bytes(4))), ['sha256' => $sha]);
            self::awaitKnown($client, $id, 10);
            self::assertSame($sha, self::assertSucceeds($client, $id)['sha256']);
        }
    }

    public function testTheLastHandoffCanBeReported(): void
    {
        $client = self::unixClient();
        self::assertNull($client->lastHandoffSeconds());
        [$src] = self::makeFile('observed-handoff.bin', 10);
        self::assertSucceeds($client, $client->upload('local', $src, '/php/' . self::$run . '/observed-handoff.bin'));
        $client->observeLastHandoff();
        self::assertMetric('sidecar_php_handoff_seconds_count', ['transport' => 'unix', 'acked' => 'true']);
    }
}
