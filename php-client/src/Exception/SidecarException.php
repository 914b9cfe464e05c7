<?php

declare(strict_types=1);

namespace TransferSidecar\Exception;

/**
 * Marker of every exception this library throws: `catch (SidecarException $e)` catches them all.
 */
interface SidecarException extends \Throwable
{
}
