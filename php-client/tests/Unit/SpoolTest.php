<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Unit;

use PHPUnit\Framework\TestCase;
use TransferSidecar\Exception\InvalidArgumentException;
use TransferSidecar\Exception\SpoolException;
use TransferSidecar\JobId;
use TransferSidecar\Spool;

final class SpoolTest extends TestCase
{
    private string $dir;

    protected function setUp(): void
    {
        $this->dir = sys_get_temp_dir() . '/sidecar-spool-' . bin2hex(random_bytes(6));
        mkdir($this->dir, 0700);
    }

    protected function tearDown(): void
    {
        foreach (scandir($this->dir) ?: [] as $name) {
            if ($name !== '.' && $name !== '..') {
                unlink($this->dir . '/' . $name);
            }
        }
        rmdir($this->dir);
    }

    public function testWritesACompleteIdJsonFileAndNoTempFile(): void
    {
        $id = JobId::generate();
        $json = json_encode(['id' => $id, 'direction' => 'upload', 'target' => 'hdfs', 'local' => '/var/www/uploads/a b.bin', 'remote' => '/2026/ä.bin'], JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
        $path = (new Spool($this->dir . '/'))->write($id, $json);

        self::assertSame($this->dir . '/' . $id . '.json', $path);
        self::assertSame([$id . '.json'], array_values(array_diff(scandir($this->dir), ['.', '..'])), 'no temp file is left');
        self::assertSame($json, file_get_contents($path));
        self::assertSame($id, json_decode((string) file_get_contents($path), true)['id']);
        self::assertSame(0640, fileperms($path) & 0777);
    }

    public function testASecondWriteOfTheSameIdReplacesTheFileWhole(): void
    {
        $spool = new Spool($this->dir);
        $id = JobId::generate();
        $spool->write($id, str_repeat('x', 100000));
        $spool->write($id, '{"id":"' . $id . '"}');
        self::assertSame('{"id":"' . $id . '"}', file_get_contents($spool->pathFor($id)));
        self::assertCount(1, array_diff(scandir($this->dir), ['.', '..']));
    }

    public function testRefusesAnIdThatIsNotAJobId(): void
    {
        $this->expectException(InvalidArgumentException::class);
        (new Spool($this->dir))->write('../escape', '{}');
    }

    public function testAMissingDirectoryIsASpoolException(): void
    {
        $spool = new Spool($this->dir . '/missing');
        try {
            $spool->write(JobId::generate(), '{}');
            self::fail('no exception');
        } catch (SpoolException $e) {
            self::assertStringContainsString('/missing/.tmp-', $e->getMessage());
        }
    }

    public function testTheReasonSurvivesAnApplicationErrorHandlerThatSwallowsWarnings(): void
    {
        // Like a framework's handler: @-suppressed warnings are "handled" (null), so PHP does not
        // record them for error_get_last().
        set_error_handler(static fn (): ?bool => null);
        try {
            (new Spool($this->dir . '/missing'))->write(JobId::generate(), '{}');
            self::fail('no exception');
        } catch (SpoolException $e) {
            self::assertStringContainsString('No such file or directory', $e->getMessage());
            self::assertStringNotContainsString('unknown error', $e->getMessage());
        } finally {
            restore_error_handler();
        }
    }
}
