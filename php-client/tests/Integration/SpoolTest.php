<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Integration;

use TransferSidecar\Client;
use TransferSidecar\Spool;

final class SpoolTest extends IntegrationTestCase
{
    public function testADeadSocketWritesTheJobToTheSpool(): void
    {
        $spool = self::tempDir('sidecar-php-spool-');
        [$src, $sha] = self::makeFile('spool-private.bin', 1000);
        $dead = new Client(['socket' => static::$dir . '/dead.sock', 'spool' => $spool]);
        $id = $dead->upload('local', $src, '/php/' . self::$run . '/spool-private.bin', ['sha256' => $sha, 'overwrite' => true]);

        self::assertSame([$id . '.json'], array_values(array_diff(scandir($spool), ['.', '..'])));
        self::assertSame(
            ['id' => $id, 'direction' => 'upload', 'target' => 'local', 'local' => $src, 'remote' => '/php/' . self::$run . '/spool-private.bin', 'overwrite' => true, 'sha256' => $sha],
            json_decode((string) file_get_contents("$spool/$id.json"), true)
        );
        unlink("$spool/$id.json");
        rmdir($spool);
    }

    public function testTheDaemonRunsASpooledJob(): void
    {
        [$src, $sha] = self::makeFile('spooled.bin', 5000);
        foreach (['unix' => ['socket' => static::$dir . '/dead.sock'], 'tcp' => ['host' => '127.0.0.1', 'port' => 1]] as $transport => $dead) {
            $id = (new Client($dead + ['spool' => self::env('SIDECAR_SPOOL')]))
                ->upload('local', $src, sprintf('/php/%s/spooled-%s.bin', self::$run, $transport), ['sha256' => $sha]);
            $client = self::unixClient();
            self::awaitKnown($client, $id, 30);
            self::assertSame($sha, self::assertSucceeds($client, $id)['sha256']);
            self::assertFileDoesNotExist(self::env('SIDECAR_SPOOL') . "/$id.json", 'the daemon removes an ingested file');
        }
    }

    public function testAJobBothAcceptedAndSpooledRunsOnce(): void
    {
        [$src] = self::makeFile('twice.bin', 100);
        $remote = '/php/' . self::$run . '/twice.bin';
        $client = self::unixClient();
        $id = $client->upload('local', $src, $remote);
        // What the client would have spooled had the 202 been lost on the way back.
        (new Spool(self::env('SIDECAR_SPOOL')))->write($id, json_encode(['id' => $id, 'direction' => 'upload', 'target' => 'local', 'local' => $src, 'remote' => $remote], JSON_UNESCAPED_SLASHES));
        $deadline = microtime(true) + 30;
        while (is_file(self::env('SIDECAR_SPOOL') . "/$id.json") && microtime(true) < $deadline) {
            usleep(50000);
        }
        self::assertFileDoesNotExist(self::env('SIDECAR_SPOOL') . "/$id.json", 'the daemon takes the spool file');
        self::assertFileDoesNotExist(self::env('SIDECAR_SPOOL') . "/rejected/$id.json", 'a duplicate is not a rejection');
        $job = self::assertSucceeds($client, $id);
        self::assertSame(1, $job['attempts'], 'ran once: a second run would have failed with REMOTE_EXISTS');
    }
}
