<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Integration;

use TransferSidecar\Client;
use TransferSidecar\Exception\ConnectionException;
use TransferSidecar\Exception\InvalidArgumentException;
use TransferSidecar\Exception\RequestException;

/** Client::handOffAll(): many jobs in one call, their lines pipelined on one connection. */
final class BatchTest extends IntegrationTestCase
{
    /** @return iterable<string, array{0: \Closure(): Client}> */
    public static function clients(): iterable
    {
        yield 'lines over the unix socket' => [fn () => self::unixClient()];
        yield 'lines over TCP' => [fn () => self::tcpClient()];
        yield 'lines, persistent' => [fn () => self::unixClient(['persistent' => true])];
        yield 'lines on the hand-off socket' => [fn () => self::handoffClient()];
        yield 'lines on the hand-off socket, persistent' => [fn () => self::handoffClient(['persistent' => true])];
        yield 'http' => [fn () => self::unixClient(['protocol' => 'http'])];
    }

    /** @dataProvider clients */
    public function testEveryJobIsTakenAndRunsOnce(\Closure $make): void
    {
        $client = $make();
        $jobs = [];
        $hashes = [];
        // 70 jobs: three windows of lines; then more on the same kept connection.
        for ($i = 0; $i < 70; $i++) {
            [$src, $hashes[$i]] = self::makeFile('batch-' . bin2hex(random_bytes(4)), 100 + $i);
            $jobs[] = ['direction' => 'upload', 'target' => 'local', 'local' => $src, 'remote' => sprintf('/php/%s/batch/%s.bin', self::$run, bin2hex(random_bytes(6))), 'overwrite' => true];
        }
        $ids = array_merge($client->handOffAll(array_slice($jobs, 0, 40)), $client->handOffAll(array_slice($jobs, 40)));
        self::assertCount(70, $ids);
        self::assertContainsOnly('string', $ids);
        self::assertCount(70, array_unique($ids));
        foreach ($ids as $i => $id) {
            self::assertSame($hashes[$i], self::assertSucceeds($client, $id)['sha256']);
            self::assertSame($jobs[$i]['remote'], $client->status($id)['remote']);
        }
        self::assertNull($client->lastHandoffSeconds());
        $client->close();
    }

    public function testARefusedJobIsReturnedInItsPlaceAndTheOthersRun(): void
    {
        $client = self::unixClient();
        [$src, $sha] = self::makeFile('batch-mixed.bin', 1234);
        $job = fn (string $target, string $local, string $name) => ['direction' => 'upload', 'target' => $target, 'local' => $local, 'remote' => sprintf('/php/%s/mixed/%s', self::$run, $name)];
        $results = $client->handOffAll([
            $job('local', $src, 'a.bin'),
            $job('nope', $src, 'b.bin'),
            $job('local', $src, 'c.bin'),
            $job('local', static::$dir . '/missing.bin', 'd.bin'),
            ['direction' => 'upload', 'target' => 'local', 'local' => $src, 'remote' => sprintf('/php/%s/mixed/e.bin', self::$run), 'id' => 'batch-own-' . self::$run],
        ]);
        self::assertCount(5, $results);
        self::assertInstanceOf(RequestException::class, $results[1]);
        self::assertSame([400, 'UNKNOWN_TARGET'], [$results[1]->getStatus(), $results[1]->getErrorCode()]);
        self::assertInstanceOf(RequestException::class, $results[3]);
        self::assertSame([422, 'LOCAL_NOT_FOUND'], [$results[3]->getStatus(), $results[3]->getErrorCode()]);
        self::assertSame('batch-own-' . self::$run, $results[4]);
        foreach ([0, 2, 4] as $i) {
            self::assertSame($sha, self::assertSucceeds($client, $results[$i])['sha256']);
        }
        // The same batch again: the job with its own id is the same job (200, not run twice).
        $again = $client->handOffAll([['direction' => 'upload', 'target' => 'local', 'local' => $src, 'remote' => sprintf('/php/%s/mixed/e.bin', self::$run), 'id' => 'batch-own-' . self::$run]]);
        self::assertSame(['batch-own-' . self::$run], $again);
    }

    /** A job handed over alone (its JSON over the daemon's 64 KiB) keeps its place among the others. */
    public function testTheResultsKeepTheJobsKeysAndOrder(): void
    {
        $client = self::unixClient();
        [$src, $sha] = self::makeFile('batch-keys.bin', 321);
        $job = fn (string $name, string $local = '') => ['direction' => 'upload', 'target' => 'local', 'local' => $local === '' ? $src : $local, 'remote' => sprintf('/php/%s/keys/%s', self::$run, $name)];
        $results = $client->handOffAll([
            'avatar' => $job('avatar.bin'),
            'huge' => $job('huge.bin', static::$dir . '/' . str_repeat('x', 200) . str_repeat('/y', 35000)),
            7 => $job('seven.bin'),
            'cover' => $job('cover.bin'),
        ]);
        self::assertSame(['avatar', 'huge', 7, 'cover'], array_keys($results));
        self::assertInstanceOf(RequestException::class, $results['huge']);
        self::assertSame([413, 'PAYLOAD_TOO_LARGE'], [$results['huge']->getStatus(), $results['huge']->getErrorCode()]);
        foreach (['avatar' => 'avatar.bin', 7 => 'seven.bin', 'cover' => 'cover.bin'] as $key => $name) {
            self::assertIsString($results[$key]);
            $job = self::assertSucceeds($client, $results[$key]);
            self::assertSame([$sha, sprintf('/php/%s/keys/%s', self::$run, $name)], [$job['sha256'], $job['remote']]);
        }
    }

    public function testADaemonThatCannotBeReachedSpoolsEveryJobOrReturnsWhy(): void
    {
        [$src] = self::makeFile('batch-dead.bin', 10);
        $jobs = [];
        for ($i = 0; $i < 3; $i++) {
            $jobs[] = ['direction' => 'download', 'target' => 'local', 'local' => static::$dir . "/batch-dead-$i.bin", 'remote' => "/php/batch-dead-$i.bin"];
        }
        $spool = self::tempDir('sidecar-php-batch-spool-');
        $ids = (new Client(['socket' => static::$dir . '/dead.sock', 'spool' => $spool]))->handOffAll($jobs);
        self::assertContainsOnly('string', $ids);
        $files = array_values(array_diff(scandir($spool), ['.', '..']));
        sort($files);
        $expected = array_map(static fn (string $id): string => "$id.json", $ids);
        sort($expected);
        self::assertSame($expected, $files);
        foreach ($files as $file) {
            unlink("$spool/$file");
        }
        rmdir($spool);

        $results = (new Client(['socket' => static::$dir . '/dead.sock']))->handOffAll($jobs);
        self::assertCount(3, $results);
        self::assertContainsOnlyInstancesOf(ConnectionException::class, $results);
        unlink($src);
    }

    /** @return iterable<string, array{0: mixed, 1: string}> */
    public static function malformed(): iterable
    {
        yield 'not an array' => ['upload', 'jobs[1]: must be an array'];
        yield 'no target' => [['direction' => 'upload', 'local' => '/a', 'remote' => '/a'], 'jobs[1].target: must be a string'];
        yield 'bad direction' => [['direction' => 'sideways', 'target' => 'local', 'local' => '/a', 'remote' => '/a'], 'jobs[1].direction: must be "upload" or "download", got "sideways"'];
        yield 'unknown option' => [['direction' => 'upload', 'target' => 'local', 'local' => '/a', 'remote' => '/a', 'colour' => 'red'], 'colour: unknown job option'];
    }

    /** @dataProvider malformed */
    public function testAMalformedJobHandsOverNothing(mixed $bad, string $message): void
    {
        $good = ['direction' => 'upload', 'target' => 'local', 'local' => static::$dir . '/never.bin', 'remote' => '/php/never.bin'];
        $spool = self::tempDir('sidecar-php-batch-bad-');
        try {
            (new Client(['socket' => static::$dir . '/dead.sock', 'spool' => $spool]))->handOffAll([$good, $bad]);
            self::fail('no exception');
        } catch (InvalidArgumentException $e) {
            self::assertStringStartsWith($message, $e->getMessage());
        }
        self::assertSame([], array_values(array_diff(scandir($spool), ['.', '..'])), 'nothing spooled');
        rmdir($spool);
    }
}
