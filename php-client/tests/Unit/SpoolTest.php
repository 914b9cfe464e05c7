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
        $spool->write($id, json_encode(['id' => $id, 'remote' => '/' . str_repeat('x', 100000)]));
        $spool->write($id, '{"id":"' . $id . '"}');
        self::assertSame('{"id":"' . $id . '"}', file_get_contents($spool->pathFor($id)));
        self::assertCount(1, array_diff(scandir($this->dir), ['.', '..']));
    }

    /**
     * The rename is what publishes the job: until the directory is fsync'd it can be lost with a
     * power cut (ext4 commits it up to 5 s later), leaving only the hidden temp file the daemon
     * never reads, while upload() already returned the id. The daemon syncs its own directories
     * after a rename (store.js syncDir); the spool must too.
     */
    public function testTheDirectoryIsFsyncedAfterTheRename(): void
    {
        exec('command -v strace 2>/dev/null', $out, $code);
        if ($code !== 0) {
            self::fail('this test needs strace (scripts/test-all.sh installs it)');
        }
        $id = JobId::generate();
        $script = sprintf('require %s; (new TransferSidecar\Spool(%s))->write(%s, %s);',
            var_export(realpath(__DIR__ . '/../../src/Spool.php'), true), var_export($this->dir, true), var_export($id, true), var_export(json_encode(['id' => $id]), true));
        $script = sprintf('require %s; ', var_export(realpath(__DIR__ . '/../../src/JobId.php'), true))
            . sprintf('require %s; ', var_export(realpath(__DIR__ . '/../../src/Exception/SidecarException.php'), true))
            . $script;
        $trace = [];
        exec(sprintf('strace -e trace=openat,open,fsync,fdatasync,rename,renameat,renameat2 %s -n -r %s 2>&1',
            escapeshellarg(PHP_BINARY), escapeshellarg($script)), $trace, $code);
        self::assertSame(0, $code, implode("\n", $trace));
        $renamed = null;
        $dirFd = null;
        $synced = false;
        foreach ($trace as $line) {
            if ($renamed === null && preg_match('/^rename(at2?)?\(.*' . preg_quote($id, '/') . '\.json.*= 0$/', $line) === 1) {
                $renamed = true;
            } elseif ($renamed && preg_match('/^open(at)?\(.*"' . preg_quote($this->dir, '/') . '\/?".* = (\d+)$/', $line, $m) === 1) {
                $dirFd = $m[2];
            } elseif ($dirFd !== null && preg_match('/^f(data)?sync\(' . $dirFd . '\)\s+= 0$/', $line) === 1) {
                $synced = true;
            }
        }
        self::assertTrue($renamed, "no rename to <id>.json:\n" . implode("\n", $trace));
        self::assertTrue($synced, "the spool directory is not fsync'd after the rename:\n" . implode("\n", $trace));
    }

    public function testRefusesAnIdThatIsNotAJobId(): void
    {
        $this->expectException(InvalidArgumentException::class);
        (new Spool($this->dir))->write('../escape', '{"id":"../escape"}');
    }

    /** The daemon moves a file whose name is not the id of the job it holds to rejected/. */
    public function testRefusesABodyWithoutTheSameId(): void
    {
        $id = JobId::generate();
        foreach (['{}', 'not json', json_encode(['id' => JobId::generate()]), json_encode([$id])] as $json) {
            try {
                (new Spool($this->dir))->write($id, $json);
                self::fail($json . ' accepted');
            } catch (InvalidArgumentException $e) {
                self::assertStringStartsWith('spool: the job body', $e->getMessage());
            }
        }
        self::assertSame([], array_values(array_diff(scandir($this->dir), ['.', '..'])), 'nothing written');
    }

    public function testAMissingDirectoryIsASpoolException(): void
    {
        $spool = new Spool($this->dir . '/missing');
        $id = JobId::generate();
        try {
            $spool->write($id, json_encode(['id' => $id]));
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
        $id = JobId::generate();
        try {
            (new Spool($this->dir . '/missing'))->write($id, json_encode(['id' => $id]));
            self::fail('no exception');
        } catch (SpoolException $e) {
            self::assertStringContainsString('No such file or directory', $e->getMessage());
            self::assertStringNotContainsString('unknown error', $e->getMessage());
        } finally {
            restore_error_handler();
        }
    }
}
